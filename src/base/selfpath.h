/* selfpath.h - finding the files that come with agentbox (agentbox-init,
 * agentbox-full, the code runner's runners/ folder) from where the running
 * binary is, so that a build tree, an installed prefix and a staged install
 * (DESTDIR) all work without a path fixed at build time. */
#ifndef AB_SELFPATH_H
#define AB_SELFPATH_H

/* The directory of the running binary (from /proc/self/exe), or NULL.
 * The caller frees it. */
char *ab_self_dir(void);

/* Looks for `probe` (a relative path such as "agentbox-init" or
 * "python/runner.py") in each directory of `dirs` (NULL-terminated; relative
 * ones are taken from the running binary's directory, absolute ones as they
 * are) and returns the first directory, made canonical, in which
 * access(dir/probe, amode) succeeds. Returns NULL when none does, with
 * *looked set to the paths tried, comma-separated, for an error message.
 * The caller frees the result and *looked. */
char *ab_find_beside_self(const char *const *dirs, const char *probe, int amode, char **looked);

#endif
