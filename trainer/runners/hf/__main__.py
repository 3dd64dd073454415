import sys

from trainer.runners.hf.train import main

sys.exit(main())
