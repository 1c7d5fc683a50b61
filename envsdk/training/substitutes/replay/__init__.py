"""DQN and SAC trained from replayed transitions: flat-array buffers (``buffers``) and the
training step that samples them straight into a train batch (``training_step``)."""
