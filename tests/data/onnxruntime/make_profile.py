"""The program that made onnxruntime_profile_matmul_relu.json (see README.md)."""

import numpy as np
import onnxruntime as ort
from onnx import TensorProto, helper

X = helper.make_tensor_value_info("X", TensorProto.FLOAT, [64, 256])
Y = helper.make_tensor_value_info("Y", TensorProto.FLOAT, [64, 256])
W = helper.make_tensor("W", TensorProto.FLOAT, [256, 256], np.random.rand(256 * 256).astype(np.float32))
nodes = [helper.make_node("MatMul", ["X", "W"], ["H"]), helper.make_node("Relu", ["H"], ["Y"])]
model = helper.make_model(helper.make_graph(nodes, "g", [X], [Y], [W]), opset_imports=[helper.make_opsetid("", 17)])
options = ort.SessionOptions()
options.enable_profiling = True
session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
for _ in range(5):
    session.run(None, {"X": np.random.rand(64, 256).astype(np.float32)})
print(session.end_profiling())
