"""The layout of a device summary's row and its fixed histogram bins: what device_summary.py and its
Triton kernels (device_summary_triton.py) both read, in a module of its own so neither imports the other."""

LOW_EXPONENT, HIGH_EXPONENT = -20, 8  # magnitudes resolved: 2^-20 .. 2^8, two binades per bin
BINS_PER_SIGN = (HIGH_EXPONENT - LOW_EXPONENT) // 2 + 2  # + the two clamped ends: 16
BINS = 2 * BINS_PER_SIGN + 1  # + exact zeros: 33
# A row: min and max of the finite values (the batch and Triton; the per-gradient torch path keeps them per
# bucket, in a side buffer of the gradient's dtype), sum, sum of squares (its square root on the per-gradient
# torch path), then the bucket counts: -inf, the BINS bins, +inf, NaN (torch.bucketize's order with
# right=False, where NaN lands past the last boundary); then a small tensor's values (device_summary.ROW).
_BUCKETS = 4
COUNTS = BINS + 3  # -inf, the bins, +inf, NaN
_NAN = _BUCKETS + COUNTS - 1
_VALUES = _BUCKETS + COUNTS
