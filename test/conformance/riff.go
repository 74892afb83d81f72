package main

// riffFamilies replays ../shared/vectors/riff (issue 4).
var riffFamilies []family
