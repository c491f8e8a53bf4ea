/* placeholder: the init-protocol helper writes this file */
