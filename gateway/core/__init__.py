"""The vocabulary every room shares: values, errors, ports, settings, signals, metrics, logs."""
