"""The source stage: parse the student's kernel.cu once, the include policy, the static checks, what it declares."""
