"""Stand-in of the worker half of vLLM's OffloadingConnector
(vllm/distributed/kv_transfer/kv_connector/v1/offloading/worker.py), read
at vllm-project/vllm 0078e9d2b020be709d7d756877106fd1015ea4f4:
``register_kv_caches`` hands the spec vLLM's ``CanonicalKVCaches`` once
(``spec.get_worker``); ``prepare_store_kv`` defers a step's stores to the
start of the next step; ``start_kv_transfers`` submits them and the loads
(``submit_store``/``submit_load``, asserting they were accepted);
``handle_preemptions`` submits and ``wait``s for the jobs to flush;
``get_finished`` drains ``get_finished()`` into completed job ids and the
requests whose loads finished. Upstream asserts every result's
``success`` ("we currently do not support job failures"); the stand-in
records failed jobs in ``failed`` instead, so tests can see what the
connector reported.
"""
from typing import Dict, List, Set, Tuple


class OffloadingConnectorWorker:
    def __init__(self, spec):
        self.spec = spec
        self.worker = None
        self._load_jobs: Dict[int, str] = {}
        self._unsubmitted: List[Tuple[int, object, object]] = []
        self.completed_jobs: List[int] = []
        self.failed: Set[int] = set()
        self.results: List[object] = []

    def register_kv_caches(self, canonical_kv_caches) -> None:
        self.worker = self.spec.get_worker(canonical_kv_caches)

    def handle_preemptions(self, meta) -> None:
        for job in meta.jobs_to_flush:
            e = meta.store_jobs.pop(job, None)
            if e is not None:
                self._unsubmitted.append((job, e.src_spec, e.dst_spec))
        self._submit_stores()
        if meta.jobs_to_flush:
            self.worker.wait(meta.jobs_to_flush)

    def _submit_stores(self) -> None:
        for job, src, dst in self._unsubmitted:
            assert self.worker.submit_store(job, src, dst)
        self._unsubmitted.clear()

    def start_kv_transfers(self, meta) -> None:
        self._submit_stores()
        for job, e in meta.load_jobs.items():
            self._load_jobs[job] = e.req_id
            assert self.worker.submit_load(job, e.src_spec, e.dst_spec)

    def prepare_store_kv(self, meta) -> None:
        for job, e in meta.store_jobs.items():
            self._unsubmitted.append((job, e.src_spec, e.dst_spec))

    def get_finished(self) -> Set[str]:
        recving = set()
        for r in self.worker.get_finished():
            self.results.append(r)
            if not r.success:
                self.failed.add(r.job_id)
            self.completed_jobs.append(r.job_id)
            req = self._load_jobs.pop(r.job_id, None)
            if req is not None:
                recving.add(req)
        return recving

    def take_completed(self) -> List[int]:
        out, self.completed_jobs = self.completed_jobs, []
        return out

    def shutdown(self) -> None:
        self._unsubmitted.clear()
        self._load_jobs.clear()
        if self.worker is not None:
            self.worker.shutdown()
