package main

// kedaFamilies replays ../shared/vectors/keda (issue 4).
var kedaFamilies []family
