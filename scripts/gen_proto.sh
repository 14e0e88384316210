#!/usr/bin/env bash
# Regenerate src/polyprof/formats/xplane_pb2.py(.pyi) from xplane.proto (needs grpcio-tools).
# The proto is registered as "polyprof/formats/xplane.proto" so its file name cannot
# clash with another package's xplane.proto in the protobuf descriptor pool.
# The generated module checks the protobuf runtime version: keep the protobuf lower
# bound in pyproject.toml equal to the "Protobuf Python Version" it prints below.
set -euo pipefail
cd "$(dirname "$0")/../src"
python -m grpc_tools.protoc --version
python -m grpc_tools.protoc -I. --python_out=. --pyi_out=. polyprof/formats/xplane.proto
grep -m1 "Protobuf Python Version" polyprof/formats/xplane_pb2.py
