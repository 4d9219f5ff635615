"""Training a ViT from scratch (`vitviz train`, whose flags are in vitviz/commands/train.py).

train.py         data sets, model presets, optimizer and schedule, the loop, checkpoints and resuming
augment.py       whole data sets kept on the device and augmented there, a batch at a time
metrics.py       top-1, per-class precision and recall, the confusion matrix
"""
