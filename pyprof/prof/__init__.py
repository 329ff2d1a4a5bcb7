"""prof: per-kernel direction, FLOPs, bytes, tensor cores and roofline gap from parse's records."""
