#include "image/manifest.h"

/* Being written (issue 12). */
