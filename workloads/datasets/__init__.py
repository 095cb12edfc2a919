"""Training data: real image sets read from files, or a synthetic set of the same shapes.

LeNet trains on 28x28 grey images (``mnist``, ``fashion-mnist``, ``mnist-5k``), ResNet on
CIFAR-10 (as in Park, Lee & Kim 2019); ``synthetic`` serves both. Nothing is downloaded
here: ``edgeprof data fetch`` fills a data folder beforehand, because a worker on a Pi
must not depend on the internet in the middle of a sweep. Layout of a data folder ``DIR``:

    DIR/mnist/{train,t10k}-{images-idx3,labels-idx1}-ubyte[.gz]   (or directly in DIR)
    DIR/fashion-mnist/... the same four names                      (or directly in DIR)
    DIR/mnist_5k.csv.gz
    DIR/cifar10/cifar-10-batches-bin/data_batch_{1..5}.bin, test_batch.bin
                                               (or DIR/cifar-10-batches-bin/)

The package is cut by who uses it:

- ``catalog``: the sets edgeprof knows (names, shapes, sizes, normalization).
- ``resolver``: the controller's side, planning only: which set a cell gets (``auto``),
  where its files are and whether they are sound (headers and sizes). It reads no arrays
  and imports no NumPy until a check needs it (only mnist-5k's text file does).
- ``loader``: the worker's side: reads a set's arrays and takes the worker's part.
- ``idx``, ``cifar``, ``mnist5k``, ``synthetic``: one file format (or generator) each.
- ``user``: the user's own data (``--dataset PATH``): ``describe`` checks and converts it
  on the controller (an image folder through ``imagefolder``, with Pillow) into one
  canonical file (``npzfile``), which a worker reads a shard of (``user.Staged``).

Importing any of them does not import MXNet.
"""
