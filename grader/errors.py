"""Errors that end a grading run with exit code 2 (misuse): bad config, bad case file, missing path."""


class UsageError(Exception):
    """The grader was asked to do something it cannot: the message says what and where."""


class ConfigError(UsageError):
    def __init__(self, file: str, key: str, problem: str):
        self.file, self.key, self.problem = file, key, problem
        where = f"{file}: {key}" if key else file
        super().__init__(f"{where}: {problem}")
