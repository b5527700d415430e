"""A hand-written TensorFlow 2 training loop: the yardstick dlrun's TensorFlow harness is measured against.

keras.applications.ResNet50 (weights=None, logits), Keras SGD with momentum 0.9, sparse cross entropy, one
fixed random batch kept in memory, a tf.function GradientTape step, the same intra-op threads; nothing else:
no logging, no per-step timing or waiting, no rank detection, no replica check. `--fit` runs Keras'
`model.fit` over the same batch repeated instead. Prints one JSON line.
"""
from __future__ import annotations

import argparse
import json
import time


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--warmup-steps", type=int, default=2)
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--fit", action="store_true")
    args = p.parse_args()
    import keras
    import tensorflow as tf

    if args.threads:
        tf.config.threading.set_intra_op_parallelism_threads(args.threads)
    keras.utils.set_random_seed(1234)
    model = keras.applications.ResNet50(weights=None, classifier_activation=None)
    opt = keras.optimizers.SGD(learning_rate=0.01, momentum=0.9)
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    images = tf.random.uniform((args.batch_size, 224, 224, 3))
    labels = tf.random.uniform((args.batch_size,), maxval=1000, dtype=tf.int32)
    if args.fit:
        model.compile(optimizer=opt, loss=loss_fn)
        data = tf.data.Dataset.from_tensors((images, labels)).repeat()
        model.fit(data, steps_per_epoch=args.warmup_steps, epochs=1, verbose=0)
        start = time.perf_counter()
        model.fit(data, steps_per_epoch=args.steps, epochs=1, verbose=0)
    else:
        @tf.function
        def step():
            with tf.GradientTape() as tape:
                loss = loss_fn(labels, model(images, training=True))
            grads = tape.gradient(loss, model.trainable_variables)
            opt.apply_gradients(zip(grads, model.trainable_variables))
            return loss

        for _ in range(args.warmup_steps):
            float(step())
        start = time.perf_counter()
        for _ in range(args.steps):
            loss = step()
        float(loss)  # wait for the last step
    wall = time.perf_counter() - start
    print(json.dumps({"images_per_sec": args.batch_size * args.steps / wall, "wall_s": wall}))


if __name__ == "__main__":
    main()
