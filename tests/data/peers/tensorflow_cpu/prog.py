import sys
import tensorflow as tf

tf.random.set_seed(0)
model = tf.keras.Sequential(
    [tf.keras.layers.Input((32,)), tf.keras.layers.Dense(64, activation="relu"), tf.keras.layers.Dense(10)]
)
opt = tf.keras.optimizers.SGD(0.01)
x = tf.random.normal((128, 32))
y = tf.random.uniform((128,), maxval=10, dtype=tf.int32)


@tf.function
def step(x, y):
    with tf.GradientTape() as t:
        loss = tf.reduce_mean(tf.keras.losses.sparse_categorical_crossentropy(y, model(x), from_logits=True))
    g = t.gradient(loss, model.trainable_variables)
    opt.apply_gradients(zip(g, model.trainable_variables))
    return loss


step(x, y)
tf.profiler.experimental.start(sys.argv[1])
for i in range(10):
    with tf.profiler.experimental.Trace("train", step_num=i, _r=1):
        step(x, y)
tf.profiler.experimental.stop()
