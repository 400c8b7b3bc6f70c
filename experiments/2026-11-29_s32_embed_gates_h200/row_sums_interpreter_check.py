"""Session 32's check of the one-pass row-sum kernels (branch s32-rowsums, row_sums_one_pass.patch) in Triton's
interpreter, on the CPU: N random cases (windows of 4 to 16, runs within and across windows, up to 40 windows
long, 1 to 3 blocks of columns), each exact against float64 with integer-valued gradients, and bit-identical to main's kernels (d961f87) with
random ones. Usage, with main's train_gpt.py as old_tg.py and the branch's as new_tg.py in FOLDER:
    TRITON_INTERPRET=1 PYTHONPATH=<triton 3.6> python3 row_sums_interpreter_check.py N FOLDER
300 cases passed; with the `~goes_on` of `within` taken out, case 1 failed (the check can fail)."""
import sys, random, torch, triton
sys.path.insert(0, sys.argv[2])
import old_tg, new_tg

def run_new(out, grad, sorted_ids, order, tiles):
    T, D = grad.shape
    windows = triton.cdiv(T, tiles["WINDOW"])
    edge = torch.full((2, windows, D), float("nan"))
    new_tg.window_run_sums_kernel[(windows, triton.cdiv(D, tiles["COLS"]))](grad, sorted_ids, order, out, edge, T, D=D, **tiles)
    new_tg.crossing_run_totals_kernel[(windows, triton.cdiv(D, tiles["COLS"]))](edge, sorted_ids, out, T, D=D, **tiles)

def run_old(out, grad, sorted_ids, order, tiles):
    T, D = grad.shape
    sums = torch.full((T, D), float("nan"))
    grid = (triton.cdiv(T, tiles["WINDOW"]),)
    old_tg.window_run_sums_kernel[grid](grad, sorted_ids, order, sums, T, D=D, **tiles)
    old_tg.run_totals_kernel[grid](sums, sorted_ids, out, T, D=D, **tiles)

rng = random.Random(0)
cases = 0
for trial in range(int(sys.argv[1])):
    W = rng.choice([4, 8, 16])
    tiles = dict(WINDOW=W, COLS=rng.choice([4, 8]))
    T = rng.randint(1, 40 * W)
    D = rng.choice([3, 4, 8, 12])
    V = rng.choice([1, 2, 5, 50, 1000])
    power = rng.choice([1, 3, 8])
    g = torch.Generator().manual_seed(trial)
    ids = torch.minimum((V * torch.rand(T, generator=g) ** power).int(), torch.tensor(V - 1, dtype=torch.int32))
    grad = torch.randint(-8, 9, (T, D), generator=g).to(torch.bfloat16)
    out = torch.randint(-100, 100, (V, D), generator=g).float()
    sorted_ids, order = torch.sort(ids, stable=True)
    sorted_ids = sorted_ids.contiguous(); order = order.contiguous()
    new, old = out.clone(), out.clone()
    run_new(new, grad, sorted_ids, order, tiles)
    exact = out.double().index_add(0, ids.long(), grad.double())
    assert torch.equal(new.double(), exact), (trial, T, W, D, V, (new.double() - exact).abs().max())
    # real-valued gradients: bit-identical to the kernels on main
    gradr = torch.randn(T, D, generator=g).to(torch.bfloat16)
    a, b = out.clone(), out.clone()
    run_new(a, gradr, sorted_ids, order, tiles); run_old(b, gradr, sorted_ids, order, tiles)
    assert torch.equal(a, b), (trial, "differs from main")
    cases += 1
print("ok", cases)
