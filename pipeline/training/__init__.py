"""Training: Keras models (models/), tasks (tasks/), tf.data pipelines over shards (tfdata.py)."""
