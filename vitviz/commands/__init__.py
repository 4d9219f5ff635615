"""The command line: `vitviz <command>`, one module per command, each with an importable ``main(argv)``.

    cli.py           the `vitviz` command itself: picks the command and runs its main(argv) (also `python -m vitviz`)
    app.py           vitviz app: the dashboard in the browser (`streamlit run` with its settings)
    explain.py       vitviz explain: overlays, maps and predictions for a folder of images (and of videos)
    explain_video.py vitviz explain on videos: overlay GIFs or MP4s and an npz per video, with a video model
    ask.py           vitviz ask: a vision-language model's answer about photos, and where its tokens look
    benchmark.py     vitviz benchmark: faithfulness of the explanation methods over a folder (also under torchrun)
    train.py         vitviz train: the flags and recipes of a training run (the run itself is vitviz.training)
    evaluate.py      vitviz evaluate: accuracy, per-class accuracy and the confusion matrix on a labelled folder
    index.py         vitviz index: index a dataset once (the pass itself is vitviz.dataset), and --verify
    sae.py           vitviz sae: train (vitviz.sae.train), evaluate, latents and ablate for sparse autoencoders
    common.py        what the commands share: the image files their arguments name

Every subcommand lives here; the library never imports this package (tests/test_layout.py checks).
"""
