import './graph.css';
