//! Hash functions and key distributions, identical to twemproxy 0.5.
