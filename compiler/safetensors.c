/* safetensors.c: the one translation unit holding the safetensors.h implementation. */
#define SAFETENSORS_IMPLEMENTATION
#include "safetensors.h"
