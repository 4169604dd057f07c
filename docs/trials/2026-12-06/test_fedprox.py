from tests.methods.exactness import run_ok

CORA = ["dataset=cora", "model=gcn", "workers=2", "epochs=3", "method.local=full"]


def losses(record):
    return [(h["train_loss"], h["val_acc"]) for h in record["history"]]


def test_mu_zero_is_plain_local_rounds_and_mu_pulls_only_the_local_steps(make_cfg):
    plain = run_ok(make_cfg("method=psgd_pa", "method.local_steps=3", *CORA))[1]
    unpulled = run_ok(make_cfg("method=fedprox", "method.mu=0", "method.local_steps=3", *CORA))[1]
    assert losses(unpulled) == losses(plain)
    assert unpulled["control"] == plain["control"] == "full_halo"

    pulled = run_ok(make_cfg("method=fedprox", "method.mu=10", "method.local_steps=3", *CORA))[1]
    assert losses(pulled) != losses(plain)
    assert pulled["comm"]["bytes_per_epoch_by_category"] == plain["comm"]["bytes_per_epoch_by_category"]


def test_the_anchor_is_the_last_average(make_cfg):
    # one local step a round starts from the average itself: the proximal term and its gradient are 0
    plain = run_ok(make_cfg("method=psgd_pa", "method.local_steps=1", *CORA))[1]
    pulled = run_ok(make_cfg("method=fedprox", "method.mu=10", "method.local_steps=1", *CORA))[1]
    assert losses(pulled) == losses(plain)
