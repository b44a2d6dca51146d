const { useTapeproxy } = require("tapeproxy/jest");

globalThis.tape = useTapeproxy();
