"""Which revision of the gonka.mlnode.v1 contract these stubs are: the record the server reports in
GetServerStatusResponse (contract_revision, contract_digest) and a client can compare with its own.

REVISION and DIGEST are written by `make contract` (protos/contract.py) after any change to
protos/, and reviewed with it; tests/unit/test_contract.py fails while they are stale. The record
lives here, in the installed package, rather than beside the protos, so that an installed server
or client can read it.

The digest covers what goes on the wire and into generated code, not comments: the
FileDescriptorProtos of the package's proto files as protoc compiled them into the stubs (no source
info), parsed and re-serialized deterministically, in a FileDescriptorSet sorted by file name.
"""

from __future__ import annotations

import hashlib
import importlib
import pkgutil
from collections.abc import Iterable
from types import ModuleType

from google.protobuf import descriptor_pb2

import gonka.mlnode.v1

# Written by `make contract`: the previous commit's revision, plus one when the digest changed.
REVISION = 7
DIGEST = "sha256:e8aad5834689e0342ff68445543cc8cda74d69e3a8db1d9d495e144da4ae36de"


def stub_digest() -> str:
    """The digest of the contract the installed stubs were generated from."""
    return descriptor_digest(module.DESCRIPTOR.serialized_pb for module in _stub_modules())


def descriptor_digest(serialized_files: Iterable[bytes]) -> str:
    """ "sha256:<hex>" of serialized FileDescriptorProtos, whatever their order."""
    files = sorted(
        (descriptor_pb2.FileDescriptorProto.FromString(data) for data in serialized_files), key=lambda file: file.name
    )
    descriptor_set = descriptor_pb2.FileDescriptorSet(file=files)
    return "sha256:" + hashlib.sha256(descriptor_set.SerializeToString(deterministic=True)).hexdigest()


def _stub_modules() -> list[ModuleType]:
    """Every generated message module of the package (one per proto file; the *_pb2_grpc modules
    add no descriptors)."""
    names = (info.name for info in pkgutil.iter_modules(gonka.mlnode.v1.__path__))
    return [importlib.import_module(f"gonka.mlnode.v1.{name}") for name in sorted(names) if name.endswith("_pb2")]
