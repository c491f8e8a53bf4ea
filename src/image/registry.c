#include "image/registry.h"

/* Being written (issue 12). */
