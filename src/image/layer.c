#include "image/layer.h"

/* Being written (issue 12). */
