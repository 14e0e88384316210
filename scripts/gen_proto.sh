#!/usr/bin/env bash
# Regenerate the committed protobuf modules (needs grpcio-tools):
#   src/polyprof/formats/xplane_pb2.py(.pyi)           from formats/xplane.proto
#   src/polyprof/capture/profiler_service_pb2.py(.pyi)   from capture/profiler_service.proto
#   src/polyprof/formats/perfetto_read/trace_pb2.py(.pyi) from formats/perfetto_read/trace.proto
# The protos are registered as "polyprof/..." with polyprof's own packages so their
# names cannot clash with another package's (TensorFlow's, xprof's) in the protobuf
# descriptor pool. (The HLO modules an XSpace holds are decoded without protobuf:
# formats/xspace/hlo.py names XLA's hlo.proto / xla_data.proto field numbers it reads.)
# The generated modules check the protobuf runtime version: keep the protobuf lower
# bound in pyproject.toml equal to the "Protobuf Python Version" printed below.
set -euo pipefail
cd "$(dirname "$0")/../src"
python -m grpc_tools.protoc --version
python -m grpc_tools.protoc -I. --python_out=. --pyi_out=. polyprof/formats/xplane.proto \
    polyprof/capture/profiler_service.proto polyprof/formats/perfetto_read/trace.proto
grep -m1 "Protobuf Python Version" polyprof/formats/xplane_pb2.py polyprof/capture/profiler_service_pb2.py \
    polyprof/formats/perfetto_read/trace_pb2.py
