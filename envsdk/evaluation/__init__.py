"""A checkpoint back to a policy: restoring it, rollouts, videos, experience files, ONNX export."""
