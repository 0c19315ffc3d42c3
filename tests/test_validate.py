from pymc_sgmcmc import validate


def test_validation_script_prints_the_table(capsys, tmp_path):
    output = tmp_path / "table.md"
    validate.main(
        ["--models", "nig", "--samplers", "SGHMC", "--draws", "300", "--output", str(output)]
    )
    printed = capsys.readouterr().out
    assert "max abs mean error / sd" in printed
    row = next(line for line in printed.splitlines() if line.startswith("| NIG regression"))
    cells = [cell.strip() for cell in row.strip("|").split("|")]
    assert cells[1] == "10,000" and cells[2] == "SGHMC"
    assert float(cells[3]) < 1 and 0.5 < float(cells[4]) < 1.5 and float(cells[5]) > 0
    assert output.read_text().startswith(validate.HEADER)


def test_nuts_rows_give_each_sampler_its_wall_time_over_nuts_s(capsys):
    validate.main(
        ["--models", "nig", "--samplers", "SGHMC", "--draws", "200", "--tune", "200", "--nuts"]
    )
    lines = capsys.readouterr().out.splitlines()
    nuts_row = next(line for line in lines if f"| {validate.NUTS} |" in line)
    cells = [cell.strip() for cell in nuts_row.strip("|").split("|")]
    # NUTS's own accuracy and its ESS per 1,000 leapfrog steps.
    assert float(cells[3]) < 1 and 0.5 < float(cells[4]) < 1.5 and float(cells[5]) > 0
    ratio_line = next(line for line in lines if "x NUTS's" in line)
    assert ratio_line.startswith("NIG regression, N=10,000: SGHMC took")


def test_a_sampler_s_ratio_is_its_wall_time_over_that_of_nuts_on_the_same_model():
    rows = [
        {"model": "a", "n_rows": 10, "sampler": validate.NUTS, "seconds": 40.0},
        {"model": "a", "n_rows": 10, "sampler": "SGLD", "seconds": 4.0},
        {"model": "a", "n_rows": 20, "sampler": "SGLD", "seconds": 3.0},
        {"model": "b", "n_rows": 10, "sampler": validate.NUTS, "seconds": 10.0},
        {"model": "b", "n_rows": 10, "sampler": "SGHMC", "seconds": 5.0},
    ]
    assert validate.nuts_ratios(rows) == [
        "a, N=10: SGLD took 4.0 s, 0.100x NUTS's 40.0 s",
        "b, N=10: SGHMC took 5.0 s, 0.500x NUTS's 10.0 s",
    ]
