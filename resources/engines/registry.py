"""Engine name -> adapter class. Adapters for real engines register here as they are added."""

from resources.engines.base import EmulatorAdapter, EngineAdapter

ADAPTERS: dict[str, type[EngineAdapter]] = {
    "emulator": EmulatorAdapter,
}
