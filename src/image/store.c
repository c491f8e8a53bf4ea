#include "image/store.h"

/* Being written (issue 12). */
