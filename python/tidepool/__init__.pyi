# Type stubs of the tidepool Python package (docs/python.md).
# The package is a thin layer over libpool (the C extension _tidepool):
# no key, hash or wire logic lives in Python.
from __future__ import annotations

import asyncio
from typing import Any, Callable, Iterable, Optional, Sequence, Union

# A buffer: any C-contiguous object of the buffer protocol (bytearray,
# memoryview, numpy array) or a torch tensor (contiguous; CPU, or CUDA on
# the GPU path). Keys: 32-byte bytes-like objects, or one buffer of n*32
# bytes.
Buffer = Any
Keys = Union[Sequence[bytes], bytes, bytearray, memoryview, Any]

KEY_BYTES: int  # 32
VALUE_MAX: int  # largest value a put accepts (64 MiB)
BATCH_MAX: int  # most keys in one call
CHUNK_TOKENS: int  # 256
EEXIST: int  # errno.EEXIST, what put() reports for a key already present
__version__: str

class PoolError(OSError):
    """Every failure of libpool: .errno is the errno, .strerror
    pool_strerror()'s text."""

class PoolConnectionError(PoolError, ConnectionError): ...  # ENOTCONN, ECONNREFUSED, EHOSTUNREACH, ECONNRESET, EPIPE
class PoolPermissionError(PoolError, PermissionError): ...  # EACCES, EPERM
class PoolCapacityError(PoolError, MemoryError): ...  # EDQUOT, ENOSPC
class PoolTimeoutError(PoolError, TimeoutError): ...  # ETIMEDOUT, ETIME
class PoolFileNotFoundError(PoolError, FileNotFoundError): ...  # ENOENT
class ClosedError(ValueError):
    """An operation on a closed Pool, KV, Region or GPU handle."""
class ForkError(RuntimeError):
    """A handle opened in another process (before fork()) was used."""

def prefix_keys(tokens: Any, tenant: str, model: str,
                chunk_tokens: int = 256) -> list[bytes]:
    """Chained prefix keys (docs/kv.md, "Keys") of a token sequence:
    tokens as a list of ints, or a 1-D numpy/torch integer array (values
    0 .. 2**32-1). One 32-byte key per whole chunk."""

def strerror(err: int) -> str: ...

class Pool:
    def __init__(self, addr: Optional[str] = None,
                 tenant: Optional[str] = None,
                 secret_file: Optional[str] = None, *,
                 timeout_ms: int = 0, client_name: Optional[str] = None,
                 max_inflight: int = 0) -> None: ...
    def __enter__(self) -> Pool: ...
    def __exit__(self, *exc: Any) -> None: ...
    def close(self) -> None: ...
    @property
    def closed(self) -> bool: ...
    def alloc(self, nbytes: int, *, node: int = -1,
              replica: bool = False) -> Region: ...
    def kv(self, replicas: int = 1, *, nthreads: int = 0,
           refresh_ms: int = 0, lease_ms: int = 0) -> KV: ...
    def gpu(self, backend: str = "auto", device: int = 0, *,
            staging_bytes: int = 0, staging_count: int = 0,
            numa_node: int = -1) -> GPU: ...
    def map(self, region: Region, local_bytes: int = 0, *,
            existing: bool = False, huge: Optional[bool] = None,
            owns_region: bool = False) -> Mapping: ...
    def stats(self) -> dict[str, int]: ...
    def memds(self) -> list[dict[str, Any]]: ...
    def status(self) -> dict[str, Any]: ...
    @property
    def addr(self) -> str: ...

class Region:
    size: int
    node: int
    def read_into(self, offset: int, buf: Buffer) -> None: ...
    def read(self, offset: int, nbytes: int) -> bytes: ...
    def write(self, offset: int, buf: Buffer) -> None: ...
    def free(self) -> None: ...
    def __enter__(self) -> Region: ...
    def __exit__(self, *exc: Any) -> None: ...
    @property
    def closed(self) -> bool: ...

class Mapping:
    """A pool_map() range: writable memory of the buffer protocol,
    unmapped (and its region freed when owned) with its last reference."""
    address: int
    nbytes: int

class KVFuture:
    """An asynchronous KV operation. result() blocks (GIL released);
    `await fut` waits in asyncio through the handle's eventfd."""
    def done(self) -> bool: ...
    def result(self, timeout: Optional[float] = None) -> Any: ...
    def exception(self, timeout: Optional[float] = None) -> Optional[BaseException]: ...
    def add_done_callback(self, fn: Callable[[KVFuture], None]) -> None: ...
    def cancel(self) -> bool: ...  # always False: a started op runs to its end
    def cancelled(self) -> bool: ...
    def __await__(self) -> Any: ...

class KV:
    def prefix_keys(self, tokens: Any, tenant: str, model: str,
                    chunk_tokens: int = 256) -> list[bytes]: ...
    def exists(self, keys: Keys) -> int:
        """Length of the longest prefix of keys all present."""
    def put(self, keys: Keys, values: Sequence[Buffer], *,
            stream: Any = None, gpu: Optional[GPU] = None) -> list[int]:
        """Per key: 0 stored, errno.EEXIST already present (stored too),
        else the errno why not (ENOSPC, EBUSY, ENOTCONN, EMSGSIZE...)."""
    def get_into(self, keys: Keys, bufs: Sequence[Buffer], *,
                 stream: Any = None, gpu: Optional[GPU] = None,
                 exact: bool = True) -> list[Any]:
        """Per key: True hit (buf holds exactly the committed value, which
        must be exactly len(buf) bytes: ValueError otherwise), False miss.
        CUDA tensors or a stream: the GPU path (stream-ordered; returns
        once the copies are enqueued). exact=False: per key the value's
        length (a hit when <= len(buf): it fills the buffer's start), or
        -1 for a miss; never a ValueError."""
    def delete(self, keys: Keys) -> list[bool]: ...
    def pin(self, keys: Keys) -> list[bool]: ...
    def unpin(self, keys: Keys) -> list[bool]: ...
    def clear(self) -> None:
        """Empties the tenant's store on every donor (pinned keys too;
        other tenants' keys stay). PoolError (EOPNOTSUPP: a memd older than
        protocol 4) when a donor could not; the others are still asked."""
    def put_async(self, keys: Keys, values: Sequence[Buffer]) -> KVFuture: ...
    def get_into_async(self, keys: Keys, bufs: Sequence[Buffer], *,
                       exact: bool = True) -> KVFuture: ...
    def exists_async(self, keys: Keys) -> KVFuture: ...
    def delete_async(self, keys: Keys) -> KVFuture: ...
    def pin_async(self, keys: Keys) -> KVFuture: ...
    def unpin_async(self, keys: Keys) -> KVFuture: ...
    def eventfd(self) -> int: ...
    def poll(self) -> int:
        """Completes the futures whose ops have finished (reads the
        eventfd); returns how many. Called by asyncio's reader."""
    def stats(self) -> dict[str, int]: ...
    def close(self) -> None: ...
    @property
    def closed(self) -> bool: ...
    def __enter__(self) -> KV: ...
    def __exit__(self, *exc: Any) -> None: ...

class GPUStream:
    """A stream of the host backend (stands in for a CUDA stream)."""
    def synchronize(self, timeout_ms: int = -1) -> None: ...
    def close(self) -> None: ...

class GPUXfer:
    """A pool <-> device transfer (pool_gpu_fetch / pool_gpu_store)."""
    def wait(self, timeout_ms: int = -1) -> bool:
        """True once complete, False while it runs; raises its error."""

class GPU:
    backend: str  # "cuda" or "host"
    device: int
    @property
    def closed(self) -> bool: ...
    def stream(self) -> GPUStream: ...
    def fetch(self, region: Region, offset: int, dst: Buffer,
              stream: Any = None) -> GPUXfer: ...
    def store(self, region: Region, offset: int, src: Buffer,
              stream: Any = None) -> GPUXfer: ...
    def stats(self) -> dict[str, Any]: ...
    def close(self) -> None: ...

def empty(shape: Union[int, Sequence[int]], dtype: Any = None, *,
          local_bytes: int = 0, pool: Optional[Pool] = None) -> Any:
    """A torch tensor whose storage is a pool_map() region (pages fetched
    on touch, at most local_bytes resident), freed when the tensor is
    collected. dtype: a torch dtype (default torch.float32)."""

def empty_numpy(shape: Union[int, Sequence[int]], dtype: Any = None, *,
                local_bytes: int = 0, pool: Optional[Pool] = None) -> Any:
    """The same as a numpy array (default dtype float32)."""

def default_pool() -> Pool:
    """The process's Pool from LIBPOOL_ADDR / LIBPOOL_TENANT /
    LIBPOOL_SECRET_FILE, connected at first use."""
