def test_pyplot_is_headless(tmp_path):
    import matplotlib

    from ppl_tok.common.plotting import pyplot

    plt = pyplot()
    assert matplotlib.get_backend().lower() == "agg"
    fig, ax = plt.subplots()
    ax.plot([0, 1], [1, 0])
    fig.savefig(tmp_path / "line.png")
    plt.close(fig)
    assert (tmp_path / "line.png").read_bytes()[:4] == b"\x89PNG"
