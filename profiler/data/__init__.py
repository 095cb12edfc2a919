"""Dataset management for edgeprof: ``fetch`` downloads and verifies MNIST and CIFAR-10."""
