import h5py
import numpy as np

from pipeline.simulators.cube import PARAM_NAMES, density_cube
from pipeline.steps.simulate import make_sample, simulate

from .conftest import make_config, run_cli, write_config


def read_dir(root):
    out = {}
    for p in sorted(root.rglob("*.h5")):
        with h5py.File(p) as f:
            out[p.relative_to(root)] = (f.attrs["sample_id"], f["density"][()], f["params"][()])
    return out


def test_same_samples_for_any_rank_count(tmp_path, serial):
    config = make_config(tmp_path, simulate={"runs": 12, "files_per_dir": 5})
    simulate(config["simulate"], tmp_path / "one", serial)
    run_cli(
        ["simulate", "--config", str(write_config(tmp_path, config)), "--out", str(tmp_path / "two")], ranks=2
    )
    one, two = read_dir(tmp_path / "one"), read_dir(tmp_path / "two")
    assert len(one) == 12 and one.keys() == two.keys()
    assert len({p.parent for p in one}) == 3  # 12 files, at most 5 per directory
    for key in one:
        assert one[key][0] == two[key][0]
        np.testing.assert_array_equal(one[key][1], two[key][1])
        np.testing.assert_array_equal(one[key][2], two[key][2])


def test_params_drawn_from_ranges_and_seed_matters(tmp_path):
    config = make_config(tmp_path)["simulate"]
    a, _ = make_sample(config, 3)
    b, _ = make_sample({**config, "seed": config["seed"] + 1}, 3)
    assert not np.array_equal(a["density"], b["density"])
    for value, name in zip(a["params"], PARAM_NAMES, strict=True):
        low, high = config["params"][name]
        assert low <= value <= high


def test_sigma_8_controls_the_fluctuations():
    # The network must be able to recover sigma_8: the log-density variance has to grow with it.
    variances = []
    for sigma_8 in (0.6, 0.8, 1.0):
        cube = density_cube(np.array([sigma_8, 0.96, 0.3]), 32, 256.0, 8.0, np.random.default_rng(1))
        assert cube.shape == (32, 32, 32) and cube.dtype == np.float32 and cube.min() >= 0
        assert abs(cube.mean() - 8.0) < 0.5
        variances.append(np.log1p(cube).var())
    assert variances[0] < variances[1] < variances[2]


def test_trace_lengths_span_two_orders_of_magnitude(tmp_path):
    config = make_config(tmp_path, simulate={"family": "trace"})["simulate"]
    lengths = [make_sample(config, i)[0]["trace"].shape[0] for i in range(200)]
    assert min(lengths) >= 10 and max(lengths) <= 1000
    assert max(lengths) / min(lengths) > 30
    assert make_sample(config, 0)[0]["trace"].shape[1] == 4


def test_rerun_keeps_existing_files(tmp_path, serial):
    config = make_config(tmp_path, simulate={"runs": 6})["simulate"]
    first = simulate(config, tmp_path / "raw", serial)
    assert first["written_this_run"] == 6
    victim = sorted((tmp_path / "raw").rglob("*.h5"))[2]
    victim.unlink()
    again = simulate(config, tmp_path / "raw", serial)
    assert again["written_this_run"] == 1 and victim.exists()


def test_each_familys_params_are_named_by_its_own_parameters(tmp_path, serial):
    """The reaction family's `params` are (vx, vy, kappa, r), not the cube's three names: the file, its
    component names (which metadata.json carries to training) and the step's summary say so."""
    import json

    from pipeline.simulators.reaction import PARAMETERS

    config = make_config(tmp_path, simulate={"family": "reaction", "runs": 2})["simulate"]
    simulate(config, tmp_path / "raw", serial)
    with h5py.File(next((tmp_path / "raw").rglob("*.h5"))) as f:
        assert f["params"].shape == (4,) and f.attrs["param_names"] == "vx,vy,kappa,r"
        assert f["params"].attrs["component_names"] == ",".join(PARAMETERS)
    assert json.loads((tmp_path / "raw" / "simulate.json").read_text())["param_names"] == list(PARAMETERS)
