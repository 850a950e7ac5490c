"""Example training programs for the runtime, on generated data so they run anywhere in seconds.

entrypoint: dlsched.workloads.resnet:build        # a small ResNet, 10 classes, 3x32x32 images
entrypoint: dlsched.workloads.lm:build            # a small transformer language model
"""
