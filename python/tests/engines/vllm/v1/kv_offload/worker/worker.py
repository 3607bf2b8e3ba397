"""Stand-in of vllm/v1/kv_offload/worker/worker.py, read at
vllm-project/vllm 06bb4a63a14b5b1f34ad9455e8e4aa017ee6e0f3: the
``OffloadingHandler`` worker API (``OffloadingSpec.get_handlers``) of the
generations before base.py's ``OffloadingWorker``. Upstream imports
``LoadStoreSpec`` from abstract.py there; this stand-in from base.py. The
router (upstream's ``OffloadingWorker`` class of this file) dispatches by
the specs' ``medium()``; the stand-in by the classes get_handlers
yields."""
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Optional, Tuple


@dataclass
class TransferResult:
    job_id: int
    success: bool
    transfer_size: Optional[int] = None
    transfer_time: Optional[float] = None
    transfer_type: Optional[Tuple[str, str]] = None


class OffloadingHandler(ABC):
    @abstractmethod
    def transfer_async(self, job_id: int, spec) -> bool: ...

    @abstractmethod
    def get_finished(self): ...

    @abstractmethod
    def wait(self, job_ids) -> None: ...

    def shutdown(self) -> None:
        """Optional."""


class HandlerRouter:
    """register_handler / transfer_async / get_finished / wait over the
    handlers, as upstream's OffloadingWorker of this file."""

    def __init__(self):
        self.routes = []
        self.handlers = []

    def register_handler(self, src_cls, dst_cls, handler):
        assert (src_cls, dst_cls) not in [r[:2] for r in self.routes]
        self.routes.append((src_cls, dst_cls, handler))
        if handler not in self.handlers:
            self.handlers.append(handler)

    def transfer_async(self, job_id, spec):
        src, dst = spec
        for s, d, h in self.routes:
            if isinstance(src, s) and isinstance(dst, d):
                try:
                    return h.transfer_async(job_id, spec)
                except Exception:
                    return False
        raise AssertionError("no handler for %r" % (spec,))

    def get_finished(self):
        out = []
        for h in self.handlers:
            out.extend(h.get_finished())
        return out

    def wait(self, job_ids):
        for h in self.handlers:
            h.wait(job_ids)

    def shutdown(self):
        for h in self.handlers:
            h.shutdown()
