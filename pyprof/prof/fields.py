"""The record fields prof reads, in the two groups :mod:`pyprof.prof.fastread` cuts a line into.

``STATIC``: the kernel's and its op's identity (names, launch configuration, layer, call site,
arguments), repeated across a training loop; ``VARYING``: what changes from one kernel to the next
(times, ids, direction). Together they are :data:`KEYS`, the fields of prof's table; the line reader
(:mod:`pyprof.prof.load`) checks exactly these, since a field prof never reads cannot break its table.
"""

STATIC = ("kind", "kShortName", "kLongName", "tid", "device", "gpu", "gpuProps", "stream", "grid", "block", "bytes", "layer",
          "trace", "mod", "op", "args", "cdtype", "aten", "atenSizes")
VARYING = ("kDuration", "start", "end", "apiStart", "opId", "seqId", "altSeqId", "dir", "opDir", "subSeqId")
KEYS = STATIC + VARYING
