/* files.h - how a box's file entry reads in an answer: its type in each
 * API's words and its name. One table, so a new file type (or a fix) lands
 * in every front at once. */
#ifndef AB_KIT_FILES_H
#define AB_KIT_FILES_H

#include "proto/initclient.h"

/* The words one API uses for the file types. */
typedef struct kit_ftype_names {
        const char *file, *dir, *symlink, *other;
} kit_ftype_names;

extern const kit_ftype_names kit_ftypes_rest;  /* agentbox: file, dir, symlink, other */
extern const kit_ftype_names kit_ftypes_envd;  /* E2B envd: FILE_TYPE_FILE, ... */
extern const kit_ftype_names kit_ftypes_execd; /* OpenSandbox execd: file, directory, ... */

/* t in the words of v (an unknown type is v->other). */
const char *kit_ftype_name(const kit_ftype_names *v, abc_ftype t);

/* The type GNU stat's %F names ("regular file", "regular empty file",
 * "directory", "symbolic link"); ABC_OTHER for anything else. */
abc_ftype kit_ftype_of_stat(const char *stat_type);

/* The entry's name: the last component of path ("b" of "/a/b"); a path
 * without a '/' or ending in one (such as "/") is its own name. Points into
 * path. */
const char *kit_base_name(const char *path);

#endif
