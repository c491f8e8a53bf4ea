#include "image/ref.h"

/* Being written (issue 12). */
