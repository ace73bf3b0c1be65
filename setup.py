from setuptools import find_packages, setup

extras = {
    # AtariEnv(backend="atari_py"): rlpyt's emulator, last released as 0.2.9 (AtariEnv's
    # list of its games is that version's). No wheels for current Pythons (3.11 included):
    # pip builds it from source, needing cmake and zlib headers (CMake 4 also needs
    # CMAKE_POLICY_VERSION_MINIMUM=3.5 in the environment).
    "atari": ["atari-py==0.2.9"],
    "mujoco": ["mujoco>=2.3.3", "imageio>=2.14"],
    "tensorboard": ["tensorboard>=2.10"],
    "plots": ["matplotlib>=3.5"],
    # rlframe.utils.report: bootstrap confidence intervals (scipy) and their figures.
    "report": ["scipy>=1.15", "matplotlib>=3.5"],
    # rlframe evaluate --video: MP4 through imageio's ffmpeg (GIF needs only Pillow);
    # gymnasium's classic control envs draw their frames with pygame.
    "video": ["imageio>=2.9", "imageio-ffmpeg>=0.4", "pygame>=2.1"],
    # The "envpool" env backend (rlframe.envs.envpool).
    "envpool": ["envpool>=0.8"],
    # RaySampler (rlframe.samplers.ray): sampling on Ray actors, locally or on a cluster.
    "ray": ["ray>=2.9"],
    # rlframe tune: Optuna (its SQLite storage, its plots with matplotlib).
    "tune": ["optuna>=4.0", "matplotlib>=3.5"],
    # logger_context(outputs=["mlflow"]): MLflow's client and its local SQLite store.
    "mlflow": ["mlflow-skinny>=2.12", "sqlalchemy>=2.0", "alembic>=1.12"],
    # logger_context(outputs=["wandb"]): Weights & Biases (offline unless logged in).
    "wandb": ["wandb>=0.19.10"],
}
# The test suite covers the MuJoCo examples, TensorBoard logging, videos, RaySampler, reports,
# plots and experiment tracking too; pytest-xdist runs it in worker processes (pytest -n 2).
extras["test"] = (["pytest>=7", "pytest-timeout>=2", "pytest-xdist>=3.2"] + extras["mujoco"]
                  + extras["tensorboard"] + extras["video"] + extras["ray"] + extras["plots"]
                  + extras["report"] + extras["tune"] + extras["mlflow"] + extras["wandb"])
# Every optional feature at once (envpool included); atari-py is the legacy Atari stack,
# a source build that ale-py (core) makes unnecessary.
extras["all"] = sorted({req for name, reqs in extras.items() if name != "atari" for req in reqs})

setup(
    name="rlframe",
    version="0.1.0",
    description="Modular deep reinforcement learning in PyTorch, in the design lineage of rlpyt.",
    long_description=open("README.md", encoding="utf-8").read(),
    long_description_content_type="text/markdown",
    packages=find_packages(include=["rlframe", "rlframe.*"]),
    package_data={"rlframe": ["py.typed"]},
    python_requires=">=3.10",
    install_requires=[
        "torch>=2.1",
        "numpy>=1.24",
        "psutil>=5.9",
        "gymnasium>=1.0",
        "ale-py>=0.9",
        "tqdm>=4.60",
        "cloudpickle>=2",
    ],
    extras_require=extras,
    entry_points={"console_scripts": ["rlframe = rlframe.cli:main"]},
    classifiers=[
        "Programming Language :: Python :: 3",
        "Topic :: Scientific/Engineering :: Artificial Intelligence",
    ],
)
