"""The CPU wing: everything that only exists so that CPU can stand in for a device.

* :mod:`.capture`, :mod:`.record`, :mod:`.bindings`: the capture stand-ins of the ACL modes
  (``TORCHAIR_DIST_CPU_CAPTURE``: the recording stand-in with device-graph rules, the
  emulating one); :mod:`.concurrency`: the model of device concurrency they run under
  (``TORCHAIR_DIST_CPU_STREAM_ORDER``);
* :mod:`.shm`, :mod:`.shm_graph`, :mod:`.transport`: the shared-memory exchange between the
  ranks of one host (``distributed_config.cpu_shm_collectives``);
* :mod:`.ge_reference`: the GE reference executor and its kernels (``max-autotune`` without
  CANN);
* :mod:`.stand_ins`: the one place that picks these implementations for this process's
  platform (nothing on a device).

Device code talks to the seams of :mod:`torchair_dist.platform.interfaces` and, outside this
package, imports only :mod:`.stand_ins`, the wing's one door; ``platform/`` imports nothing of it.
"""
