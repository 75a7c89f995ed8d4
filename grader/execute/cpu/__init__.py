"""execute/cpu"""
