"""Privacy: mechanisms, DP-SGD engines, accountants and noise calibration."""
