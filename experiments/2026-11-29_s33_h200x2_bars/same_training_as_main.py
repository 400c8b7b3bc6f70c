"""Two gloo ranks on the CPU train test_model's six steps (run_train_steps, rows fetched ahead) with the code of
checkout ROOT, and save each rank's losses, weights and table shard to OUT_rank<r>.pt. Run it on main and on the
asked-rows branch and compare with torch.equal: in session 33 the losses, every weight and both shards were the
same, bit for bit.

    python3 same_training_as_main.py ROOT OUT
"""
import os
import sys

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

root, out = sys.argv[1], sys.argv[2]


def work(rank, world_size):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT="29533")
    os.chdir(root)
    sys.path[:0] = [root, os.path.join(root, "tests")]
    dist.init_process_group("gloo", rank=rank, world_size=world_size)
    import test_model
    torch.save(test_model.run_train_steps(rank, world_size, world_size, ahead=True), f"{out}_rank{rank}.pt")
    dist.destroy_process_group()


if __name__ == "__main__":
    mp.spawn(work, args=(2,), nprocs=2)
