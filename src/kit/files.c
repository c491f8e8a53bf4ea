/* files.c - file types and entry names in each API's words (kit/files.h). */
#include "kit/files.h"

const kit_ftype_names kit_ftypes_rest = {"file", "dir", "symlink", "other"};
const kit_ftype_names kit_ftypes_envd = {"FILE_TYPE_FILE", "FILE_TYPE_DIRECTORY",
                                         "FILE_TYPE_SYMLINK", "FILE_TYPE_UNSPECIFIED"};
const kit_ftype_names kit_ftypes_execd = {"file", "directory", "symlink", "other"};

const char *kit_ftype_name(const kit_ftype_names *v, abc_ftype t)
{
        switch (t) {
        case ABC_FILE:
                return v->file;
        case ABC_DIR:
                return v->dir;
        case ABC_SYMLINK:
                return v->symlink;
        default:
                return v->other;
        }
}

abc_ftype kit_ftype_of_stat(const char *s)
{
        if (!strncmp(s, "regular", 7))
                return ABC_FILE;
        if (!strcmp(s, "directory"))
                return ABC_DIR;
        if (!strcmp(s, "symbolic link"))
                return ABC_SYMLINK;
        return ABC_OTHER;
}

const char *kit_base_name(const char *path)
{
        const char *slash = strrchr(path, '/');
        return slash && slash[1] ? slash + 1 : path;
}
