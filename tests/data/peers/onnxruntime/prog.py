import sys
import numpy as np
import onnx
from onnx import helper, TensorProto, numpy_helper
import onnxruntime as ort

rng = np.random.default_rng(0)
W1 = numpy_helper.from_array(rng.standard_normal((64, 128)).astype(np.float32), "W1")
B1 = numpy_helper.from_array(rng.standard_normal((128,)).astype(np.float32), "B1")
W2 = numpy_helper.from_array(rng.standard_normal((128, 10)).astype(np.float32), "W2")
nodes = [
    helper.make_node("MatMul", ["x", "W1"], ["h0"], name="fc1"),
    helper.make_node("Add", ["h0", "B1"], ["h1"], name="bias1"),
    helper.make_node("Relu", ["h1"], ["h2"], name="relu1"),
    helper.make_node("MatMul", ["h2", "W2"], ["h3"], name="fc2"),
    helper.make_node("Softmax", ["h3"], ["y"], name="softmax", axis=1),
]
g = helper.make_graph(
    nodes,
    "mlp",
    [helper.make_tensor_value_info("x", TensorProto.FLOAT, [None, 64])],
    [helper.make_tensor_value_info("y", TensorProto.FLOAT, [None, 10])],
    [W1, B1, W2],
)
m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
m.ir_version = 9
onnx.save(m, "mlp.onnx")
so = ort.SessionOptions()
so.enable_profiling = True
so.profile_file_prefix = sys.argv[1]
so.intra_op_num_threads = 2
so.graph_optimization_level = (
    ort.GraphOptimizationLevel.ORT_DISABLE_ALL if len(sys.argv) > 2 else ort.GraphOptimizationLevel.ORT_ENABLE_ALL
)
s = ort.InferenceSession("mlp.onnx", so, providers=["CPUExecutionProvider"])
for _i in range(int(sys.argv[3]) if len(sys.argv) > 3 else 50):
    s.run(None, {"x": rng.standard_normal((256, 64)).astype(np.float32)})
print(s.end_profiling())
