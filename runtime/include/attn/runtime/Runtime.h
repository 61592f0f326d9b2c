//===- Runtime.h - Umbrella header of the attn runtime ----------*- C++ -*-===//
#ifndef ATTN_RUNTIME_RUNTIME_H
#define ATTN_RUNTIME_RUNTIME_H

#include "attn/runtime/AttentionLaunch.h"
#include "attn/runtime/DType.h"
#include "attn/runtime/DeviceBuffer.h"
#include "attn/runtime/DiskCache.h"
#include "attn/runtime/Driver.h"
#include "attn/runtime/Error.h"
#include "attn/runtime/Hash.h"
#include "attn/runtime/Kernel.h"
#include "attn/runtime/LaunchMetadata.h"
#include "attn/runtime/Module.h"
#include "attn/runtime/SingleFlightCache.h"
#include "attn/runtime/Tensor.h"
#include "attn/runtime/TensorMap.h"
#include "attn/runtime/TuningDatabase.h"

#endif // ATTN_RUNTIME_RUNTIME_H
