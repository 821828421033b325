"""The marker these tests use, registered here too: the plugin's tests may run from its own
folder, outside the main repo's pytest settings."""


def pytest_configure(config):
    config.addinivalue_line("markers", "slow: starts processes and takes over 5 s")
