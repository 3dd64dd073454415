import sys

from trainer.runners.hf.train import main

if __name__ == "__main__":  # the image's self-test imports every trainer module
    sys.exit(main())
