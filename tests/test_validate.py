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
