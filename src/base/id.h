/* id.h - box ids. */
#ifndef AB_ID_H
#define AB_ID_H

#include "base/err.h"

/* True when s matches [a-z0-9][a-z0-9_-]{0,62}. */
bool ab_id_valid(const char *s);

/* Validates with a message that says what a valid id looks like. */
int ab_id_check(const char *s, ab_err **err);

/* A fresh random id: 16 lower-case hex characters. out must hold 17 bytes. */
void ab_id_random(char out[17]);

#endif
