"""The layout of a device summary's row and its fixed histogram bins: what device_summary.py and its
Triton kernel (device_summary_triton.py) both read, in a module of its own so neither imports the other."""

LOW_EXPONENT, HIGH_EXPONENT = -20, 8  # magnitudes resolved: 2^-20 .. 2^8, two binades per bin
BINS_PER_SIGN = (HIGH_EXPONENT - LOW_EXPONENT) // 2 + 2  # + the two clamped ends: 16
BINS = 2 * BINS_PER_SIGN + 1  # + exact zeros: 33
# A row: min and max of the finite values, sum, sum of squares (norm on the per-gradient torch path), NaN
# count, then the bucket counts: -inf, the BINS bins, then +inf (and NaN too for a float64 gradient on the
# per-gradient torch path, where torch.bucketize puts NaN last); then a small tensor's values
# (device_summary.ROW).
_BUCKETS = 5
_VALUES = _BUCKETS + BINS + 2
