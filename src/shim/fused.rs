//! Declarations of `csrc/fused.cpp`: torch.optim's fused updates.
use libc::{c_char, c_int, c_void, size_t};

extern "C" {
    pub(crate) fn fulmen_cxx_fused_adam(
        params: *const *mut c_void,
        grads: *const *mut c_void,
        exp_avgs: *const *mut c_void,
        exp_avg_sqs: *const *mut c_void,
        max_exp_avg_sqs: *const *mut c_void,
        steps: *const *mut c_void,
        n: size_t,
        lr: f64,
        lr_tensor: *const c_void,
        beta1: f64,
        beta2: f64,
        weight_decay: f64,
        eps: f64,
        amsgrad: bool,
        maximize: bool,
        decoupled: bool,
        found_inf: *const c_void,
        err: *mut c_char,
        err_len: size_t,
    ) -> c_int;
    pub(crate) fn fulmen_cxx_fused_sgd(
        params: *const *mut c_void,
        grads: *const *mut c_void,
        momentum_buffers: *const *mut c_void,
        n: size_t,
        weight_decay: f64,
        momentum: f64,
        lr: f64,
        lr_tensor: *const c_void,
        dampening: f64,
        nesterov: bool,
        maximize: bool,
        is_first_step: bool,
        found_inf: *const c_void,
        err: *mut c_char,
        err_len: size_t,
    ) -> c_int;
    pub(crate) fn fulmen_cxx_fused_adagrad(
        params: *const *mut c_void,
        grads: *const *mut c_void,
        state_sums: *const *mut c_void,
        steps: *const *mut c_void,
        n: size_t,
        lr: f64,
        lr_decay: f64,
        weight_decay: f64,
        eps: f64,
        maximize: bool,
        found_inf: *const c_void,
        err: *mut c_char,
        err_len: size_t,
    ) -> c_int;
    pub(crate) fn fulmen_cxx_amp_unscale(
        grads: *const *mut c_void,
        n: size_t,
        found_inf: *const c_void,
        inv_scale: *const c_void,
        err: *mut c_char,
        err_len: size_t,
    ) -> c_int;
}
