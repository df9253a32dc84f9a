package launcher

// InitialBackoff is the first restart back-off, for the tests of package launcher_test.
const InitialBackoff = initialBackoff
