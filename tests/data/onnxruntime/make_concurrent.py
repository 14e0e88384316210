"""The program that made onnxruntime_profile_concurrent.json (see README.md)."""

import threading

import numpy as np
import onnxruntime as ort
from onnx import TensorProto, helper

X = helper.make_tensor_value_info("X", TensorProto.FLOAT, [256, 1024])
Y = helper.make_tensor_value_info("Y", TensorProto.FLOAT, [256, 1024])
W = helper.make_tensor("W", TensorProto.FLOAT, [1024, 1024], np.random.rand(1024 * 1024).astype(np.float32))
nodes = [helper.make_node("MatMul", ["X", "W"], ["H"]), helper.make_node("Relu", ["H"], ["Y"])]
model = helper.make_model(helper.make_graph(nodes, "g", [X], [Y], [W]), opset_imports=[helper.make_opsetid("", 17)])
options = ort.SessionOptions()
options.enable_profiling = True
options.intra_op_num_threads = 1  # each run on its own thread: the runs of the three threads overlap
options.profile_file_prefix = "onnxruntime_profile_concurrent"
session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
start = threading.Barrier(3)


def serve() -> None:  # one thread of a server: its requests one after another, beside the others'
    start.wait()
    for _ in range(3):
        session.run(None, {"X": np.random.rand(256, 1024).astype(np.float32)})


threads = [threading.Thread(target=serve) for _ in range(3)]
for t in threads:
    t.start()
for t in threads:
    t.join()
print(session.end_profiling())
