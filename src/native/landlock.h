/* landlock.h - Landlock restrictions for a box, where the kernel has them. */
#ifndef AB_LANDLOCK_H
#define AB_LANDLOCK_H

/* Restricts the calling thread and its future children: no signals to and no
 * abstract-unix connections with processes outside the box's Landlock domain
 * (ABI >= 6), and no creation of device nodes. Async-signal-safe (raw
 * syscalls only), usable between fork and exec.
 * Returns the ABI version applied (> 0), 0 when Landlock is unavailable, -errno on error. */
int ab_landlock_apply(void);

#endif
