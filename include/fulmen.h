/**
 * \file fulmen.h
 * fulmen: Lightning-style training on libtorch, C API: every header of
 * the API. The conventions every function follows (errors, ownership,
 * handles in use, threads, signals, versions) are in fulmen/base.h.
 *
 * Generated from the Rust sources by `make header`; do not edit by hand.
 */

#ifndef FULMEN_H
#define FULMEN_H

#include "fulmen/base.h"
#include "fulmen/tensor.h"
#include "fulmen/tensor_ops.h"
#include "fulmen/losses.h"
#include "fulmen/data.h"
#include "fulmen/value.h"
#include "fulmen/nn.h"
#include "fulmen/script.h"
#include "fulmen/flops.h"
#include "fulmen/optim.h"
#include "fulmen/schedulers.h"
#include "fulmen/metrics.h"
#include "fulmen/module.h"
#include "fulmen/devices.h"
#include "fulmen/distributed.h"
#include "fulmen/trainer.h"
#include "fulmen/after_run.h"
#include "fulmen/callbacks.h"
#include "fulmen/prediction.h"
#include "fulmen/callback_list.h"
#include "fulmen/loggers.h"

#endif  /* FULMEN_H */
